// `relay-lifecycle ctl`: the LifecycleApi from a shell, with a token.
//
//   create --spec JSON|@FILE [--request-id ID]     prints the cluster (JSON)
//   get ID | list [--team T] [--state S] [--all] | delete ID
//   scale ID GROUP COUNT
//   submit ID [--request-id ID] -- ENTRYPOINT...   prints the job
//   job ID JOB | jobs ID | cancel ID JOB
//   watch ID                                       one JSON line per change until it ends
//   wait ID STATE [--timeout SECONDS]              until the cluster is in STATE
//   wait-job ID JOB [--timeout SECONDS]            until the job ends; exit 0 only if it SUCCEEDED
//
// Exit codes: 0 ok, 1 the call failed (the gRPC status is printed), 2 usage.
#pragma once

namespace relay::lifecycle {

// `program` names the tool in messages (relayctl runs these as `relayctl clusters`).
int CtlMain(int argc, char** argv, const char* program = "relay-lifecycle ctl");

}  // namespace relay::lifecycle

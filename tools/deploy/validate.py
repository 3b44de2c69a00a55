#!/usr/bin/env python3
"""Checks relay's deploy/ files without a cluster or a Docker engine.

  validate.py k8s --openapi DIR RENDERED.yaml...
      every object against the Kubernetes OpenAPI v3 schemas (DIR: the
      api/openapi-spec/v3 of the k8s.io/kubernetes Go module), strictly (an
      unknown field is an error, as `kubectl apply --validate=strict`), then
      relay's own rules: probes on /readyz and /healthz, requests and limits,
      a PDB, Service, NetworkPolicy and ServiceAccount per Deployment, a
      port named `metrics` opened only to named sources, no autoscaler
      above its topics' partition count.
  validate.py compose --schema compose-spec.json COMPOSE.yaml
      the compose file against the compose specification's JSON schema.

Exit 0 when all is well, 1 with one line per problem otherwise.
"""
import argparse
import copy
import glob
import json
import os
import sys

import jsonschema
import yaml


def load_docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


# --- Kubernetes -------------------------------------------------------------

def load_openapi(spec_dir):
    """{(group, version, kind): (schema name, the document's schemas)}"""
    index = {}
    for path in sorted(glob.glob(os.path.join(spec_dir, "*.json"))):
        with open(path) as f:
            doc = json.load(f)
        schemas = doc.get("components", {}).get("schemas", {})
        for name, schema in schemas.items():
            for gvk in schema.get("x-kubernetes-group-version-kind", []):
                key = (gvk["group"], gvk["version"], gvk["kind"])
                # The list/watch wrappers share a gvk with their object in
                # some files; keep the first full definition per file.
                index.setdefault(key, (name, schemas))
    return index


def strict(schemas):
    """OpenAPI v3 of Kubernetes, as JSON Schema: $refs point into
    #/components/schemas, `nullable` means null is allowed, and objects
    listing their properties admit no others (strict field validation)."""
    out = copy.deepcopy(schemas)

    def walk(s):
        if isinstance(s, dict):
            if s.get("nullable") and "type" in s:
                s["type"] = [s["type"], "null"]
            if ("properties" in s and "additionalProperties" not in s
                    and not s.get("x-kubernetes-preserve-unknown-fields")):
                s["additionalProperties"] = False
            if s.get("x-kubernetes-int-or-string"):
                s.pop("type", None)
                s["anyOf"] = [{"type": "integer"}, {"type": "string"}]
            for v in s.values():
                walk(v)
        elif isinstance(s, list):
            for v in s:
                walk(v)

    walk(out)
    return out


def validate_k8s(objects, index):
    errors = []
    cache = {}
    for obj, where in objects:
        api = obj.get("apiVersion", "")
        group, _, version = api.rpartition("/")
        kind = obj.get("kind", "")
        name = obj.get("metadata", {}).get("name", "?")
        key = (group, version, kind)
        if key not in index:
            errors.append(f"{where}: {kind} {name}: no schema for {api} {kind} in this Kubernetes version")
            continue
        schema_name, schemas = index[key]
        if id(schemas) not in cache:
            cache[id(schemas)] = strict(schemas)
        root = {"components": {"schemas": cache[id(schemas)]},
                "$ref": f"#/components/schemas/{schema_name}"}
        validator = jsonschema.Draft7Validator(root)
        for e in sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path)):
            path = "/".join(str(p) for p in e.absolute_path)
            errors.append(f"{where}: {kind} {name}: {path}: {e.message[:300]}")
    return errors


def partitions(topics_file):
    out = {}
    with open(topics_file) as f:
        for line in f:
            fields = line.split()
            if fields and not fields[0].startswith("#"):
                out[fields[0]] = int(fields[1])
    return out


# The topics each service's consumer group reads (docs/architecture.md): an
# autoscaler beyond the smallest of them adds idle replicas.
CONSUMES = {
    "relay-dispatch": ["github.webhooks", "github.requests"],
    "relay-collector": ["ci.callbacks", "relay.dispatches"],
    "relay-stats": ["github.webhooks", "relay.dispatches", "github.outcomes", "ci.results",
                    "ci.test_reports", "cluster.events"],
}


def relay_rules(objects, topics):
    errors = []
    by_kind = {}
    for obj, where in objects:
        by_kind.setdefault(obj["kind"], {})[obj["metadata"]["name"]] = (obj, where)
    parts = partitions(topics)
    for name, (dep, where) in by_kind.get("Deployment", {}).items():
        spec = dep["spec"]["template"]["spec"]
        for c in spec["containers"]:
            rp = c.get("readinessProbe", {}).get("httpGet", {}).get("path")
            lp = c.get("livenessProbe", {}).get("httpGet", {}).get("path")
            if rp != "/readyz" or lp != "/healthz":
                errors.append(f"{where}: {name}/{c['name']}: probes must be /readyz (readiness) and /healthz (liveness)")
            res = c.get("resources", {})
            for part in ("requests", "limits"):
                if not {"cpu", "memory"} <= set(res.get(part, {})):
                    errors.append(f"{where}: {name}/{c['name']}: resources.{part} needs cpu and memory")
            for env in c.get("env", []):
                if "value" in env and any(w in env["name"].lower() for w in ("secret", "password", "token", "key")):
                    errors.append(f"{where}: {name}: {env['name']} holds a secret in the manifest; use a Secret")
        selector = dep["spec"]["selector"]["matchLabels"]
        for kind in ("PodDisruptionBudget", "Service", "NetworkPolicy", "ServiceAccount"):
            if name not in by_kind.get(kind, {}):
                errors.append(f"{where}: {name}: no {kind} of the same name")
        pdb = by_kind.get("PodDisruptionBudget", {}).get(name)
        if pdb and pdb[0]["spec"]["selector"]["matchLabels"] != selector:
            errors.append(f"{where}: {name}: the PodDisruptionBudget selects other pods")
        np = by_kind.get("NetworkPolicy", {}).get(name)
        if np and np[0]["spec"]["podSelector"]["matchLabels"] != selector:
            errors.append(f"{where}: {name}: the NetworkPolicy selects other pods")
        # A port named `metrics` (http.metrics_listen) is for the scraper:
        # every ingress rule that opens it says from where.
        metrics_ports = {p["containerPort"] for c in spec["containers"] for p in c.get("ports", [])
                         if p.get("name") == "metrics"}
        for rule in (np[0]["spec"].get("ingress", []) if np else []):
            opened = {p.get("port") for p in rule.get("ports", [])}
            if (not rule.get("ports") or opened & metrics_ports) and metrics_ports and not rule.get("from"):
                errors.append(f"{where}: {name}: the NetworkPolicy opens its metrics port to any source")
        if spec.get("serviceAccountName") != name:
            errors.append(f"{where}: {name}: runs as service account {spec.get('serviceAccountName')!r}, not its own")
    for name, (hpa, where) in by_kind.get("HorizontalPodAutoscaler", {}).items():
        if name in CONSUMES:
            cap = min(parts[t] for t in CONSUMES[name])
            if hpa["spec"]["maxReplicas"] > cap:
                errors.append(f"{where}: {name}: maxReplicas {hpa['spec']['maxReplicas']} is more than the "
                              f"{cap} partitions it consumes")
    return errors


# --- compose ------------------------------------------------------------------

def validate_compose(path, schema_path):
    with open(schema_path) as f:
        schema = json.load(f)
    doc = yaml.safe_load(open(path))
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = []
    for e in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path)):
        errors.append(f"{path}: {'/'.join(str(p) for p in e.absolute_path)}: {e.message[:300]}")
    # Beyond the schema: every service's image is pinned (no :latest).
    for name, svc in (doc.get("services") or {}).items():
        image = svc.get("image", "")
        if image.endswith(":latest") or (image and ":" not in image.split("/")[-1]):
            errors.append(f"{path}: services/{name}: image {image!r} is not pinned to a tag")
    return errors


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    k = sub.add_parser("k8s")
    k.add_argument("--openapi", required=True)
    k.add_argument("--topics", required=True)
    k.add_argument("rendered", nargs="+")
    c = sub.add_parser("compose")
    c.add_argument("--schema", required=True)
    c.add_argument("file")
    args = ap.parse_args()
    if args.cmd == "k8s":
        index = load_openapi(args.openapi)
        if not index:
            print(f"validate: no OpenAPI schemas in {args.openapi}", file=sys.stderr)
            return 1
        errors = []
        for path in args.rendered:
            objects = [(o, path) for o in load_docs(path)]
            errors += validate_k8s(objects, index)
            errors += relay_rules(objects, args.topics)
            print(f"{path}: {len(objects)} objects checked", file=sys.stderr)
    else:
        errors = validate_compose(args.file, args.schema)
    for e in errors:
        print(e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

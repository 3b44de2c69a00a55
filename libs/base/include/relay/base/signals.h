// Shutdown signals. Call BlockShutdownSignals() first thing in main, before
// any thread starts, so every thread inherits the mask; then
// WaitForShutdownSignal() in main returns the signal (SIGTERM or SIGINT)
// once one arrives.
#pragma once

namespace relay {

void BlockShutdownSignals();
int WaitForShutdownSignal();

}  // namespace relay

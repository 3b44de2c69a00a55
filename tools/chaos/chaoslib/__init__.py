"""tools/chaos/run's parts: the stack, the load, the faults, the counting."""

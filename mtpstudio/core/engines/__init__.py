"""Engine adapters: capability facts and Plan -> argv/env, one module per engine."""

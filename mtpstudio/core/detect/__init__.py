"""Hardware and engine detection behind injected sources (NVML, sysfs, /proc, runner)."""

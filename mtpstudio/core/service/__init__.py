"""The service: unit, environment file and launch script from a Plan, exported or installed."""

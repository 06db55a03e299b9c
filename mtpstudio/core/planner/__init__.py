"""The planner: a Plan resolved once for a machine and a model (budget, command line, speed),
its levers and their advice, and its text."""

"""The memory model: devices, weight placement, budget terms, the budget and the fit planner."""

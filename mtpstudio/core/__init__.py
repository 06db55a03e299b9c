"""Qt-free core: the Plan, model facts, detection, engines, budget and rendering."""

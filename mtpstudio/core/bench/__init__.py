"""The benchmark: prompts, runner, history, reports, doctor and tuner."""

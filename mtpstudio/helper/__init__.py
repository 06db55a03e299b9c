"""The small privileged helper run through pkexec: a few verbs, fixed folders, atomic writes."""

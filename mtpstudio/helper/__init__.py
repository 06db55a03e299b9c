"""The small privileged helper run through pkexec."""

"""Running a server: launch, supervise, stop; reading its load log; diagnosis."""

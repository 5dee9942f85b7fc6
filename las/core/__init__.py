"""What every part of las shares, and nothing else: the configuration (its one source of truth),
errors for users, atomic files, progress and warnings, the character vocabulary, devices, threads,
deferred interrupts and the edit-distance metrics.

Layer 0: imports nothing of las.
"""

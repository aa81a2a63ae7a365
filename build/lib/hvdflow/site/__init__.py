"""``hvdflow site new``: a new cluster's profile written from what its Slurm and one of its nodes say.

Floor 6, beside ``doctor``: it imports ``config`` (the profile's loader checks what it writes), ``images`` (whether a
node can run R1), ``slurm`` (what the controller says, the probe job) and ``code_location``; only ``cli`` imports it (and
runs doctor with the profile it wrote).
"""

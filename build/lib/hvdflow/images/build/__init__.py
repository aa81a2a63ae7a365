"""Building hvdflow's own images from recipes, offline: Debian's packages (mmdebstrap) and PyPI's wheels only."""

"""Pheromone strength (SPEC §5): the field, its formula as pure functions, its strongest cells."""

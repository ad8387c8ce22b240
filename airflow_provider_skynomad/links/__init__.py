"""Extra links shown on SkyNomad task instances."""

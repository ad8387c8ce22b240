"""Small shared helpers with no SkyNomad concept of their own: SQLite settings, atomic files, optional extras."""

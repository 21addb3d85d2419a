"""Settings: the shipped defaults under the user's mlcost.toml (config, which reads them; sections, what
each section holds; checks, one value checked), the bounds on what one file may expand to (limits), and
edits to the settings file from the dashboard (settings_file). The lowest layer:
it imports nothing else of ingest."""

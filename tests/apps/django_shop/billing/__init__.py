"""A second installed app of the test project: its jobs module is found by autodiscovery too."""

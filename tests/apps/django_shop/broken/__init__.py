"""An installed app (only with COGTEST_BROKEN_APP=1) whose jobs module fails to import."""

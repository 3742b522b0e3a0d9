"""A package listed in COGWORKER_REQUIRE by tests: its submodules may be imported on demand."""

"""The use cases the CLI and the GUI both drive: launch and measure, benchmark, tune."""

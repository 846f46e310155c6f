"""Engine log parsers: one module per serving engine, each turning log text into records."""

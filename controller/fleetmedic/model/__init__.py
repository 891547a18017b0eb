"""Pure data types shared by every layer: taint vocabulary, node state, config."""

"""What happened in a run: flat span records, and the Result built from them."""

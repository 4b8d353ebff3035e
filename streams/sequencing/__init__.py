"""streams/sequencing."""

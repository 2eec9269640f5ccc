"""Worker scripts started as separate processes by the distributed tests, and their launcher."""

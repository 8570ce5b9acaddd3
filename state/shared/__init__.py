"""What every state store shares: the snapshot contract, authentication, private folders, job lock."""

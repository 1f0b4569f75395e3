"""Database backends of the ledger (``DATABASES[…]["ENGINE"]``)."""

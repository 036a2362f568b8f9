"""The real side: the interface a physical cell implements, and the reality twin that implements it here."""

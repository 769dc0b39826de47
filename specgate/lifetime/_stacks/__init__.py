"""Holds sitecustomize.py, put first on PYTHONPATH for the engine processes specgate starts."""

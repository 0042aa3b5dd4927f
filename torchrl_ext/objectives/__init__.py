"""Advantage estimation for recurrent policies."""

__all__: list[str] = []

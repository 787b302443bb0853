"""Accounts shared by many nucleo_trio workers through one Redis."""

from __future__ import annotations

__all__: list[str] = []

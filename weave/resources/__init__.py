"""Thin Falcon resources: parse, validate, call one `sql/` unit, shape the response."""

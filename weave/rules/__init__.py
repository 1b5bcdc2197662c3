"""Pure decisions over plain data: no I/O, no clock, no database. Tested without a server."""

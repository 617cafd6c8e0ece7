"""IR passes, one per module, each a function `Module -> Module` documented with what it guarantees."""

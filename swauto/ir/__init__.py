"""The AST-shaped IR (thesis 6.2.4.1): expressions, statements, printer, visitor and rewriter."""

"""Front end: the `.sw` grammar, the parser into position-carrying AST nodes, and the checker."""

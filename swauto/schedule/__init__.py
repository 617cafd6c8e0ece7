"""Schedule space: the candidates a `.sw` schedule block allows, and the transforms that build them."""

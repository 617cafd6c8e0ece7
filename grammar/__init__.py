"""The `.sw` language grammar (`swauto.lark`), shipped as package data."""

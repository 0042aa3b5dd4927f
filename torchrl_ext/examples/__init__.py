"""End-to-end pipelines behind the README's main command."""

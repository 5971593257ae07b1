"""Report sections, one module per area (DESIGN.md "Reports")."""

"""Figures, tables and the HTML report, drawn from saved run tables."""

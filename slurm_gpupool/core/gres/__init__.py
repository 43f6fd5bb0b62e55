"""GRES domain: records per node, node GRES strings, TRES names, hostlists, jinja2 rendering."""

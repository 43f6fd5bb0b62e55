"""Ground helpers with no domain knowledge: atomic writes, syslog, package resources, strict YAML (Where)."""

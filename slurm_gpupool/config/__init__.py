"""The site's file: its model, sections and value schema, machine descriptions, mig-parted import."""

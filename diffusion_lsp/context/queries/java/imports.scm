(import_declaration (scoped_identifier) @module)
(import_declaration (identifier) @module)

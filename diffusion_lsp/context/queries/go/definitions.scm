(function_declaration name: (identifier) @name body: (block) @body) @definition
(method_declaration name: (field_identifier) @name body: (block) @body) @definition
(type_declaration (type_spec name: (type_identifier) @name)) @definition
(source_file (const_declaration (const_spec name: (identifier) @name)) @definition)
(source_file (var_declaration (var_spec name: (identifier) @name)) @definition)

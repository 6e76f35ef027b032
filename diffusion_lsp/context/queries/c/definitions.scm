(function_definition
  declarator: (function_declarator declarator: (identifier) @name) body: (compound_statement) @body) @definition
(function_definition
  declarator: (pointer_declarator declarator: (function_declarator declarator: (identifier) @name))
  body: (compound_statement) @body) @definition
(declaration declarator: (function_declarator declarator: (identifier) @name)) @definition
(declaration declarator: (pointer_declarator declarator: (function_declarator declarator: (identifier) @name))) @definition
(struct_specifier name: (type_identifier) @name body: (field_declaration_list)) @definition
(enum_specifier name: (type_identifier) @name body: (enumerator_list)) @definition
(type_definition declarator: (type_identifier) @name) @definition
(preproc_def name: (identifier) @name) @definition
(preproc_function_def name: (identifier) @name) @definition

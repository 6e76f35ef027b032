(function_declaration name: (identifier) @name body: (statement_block) @body) @definition
(function_signature name: (identifier) @name) @definition
(class_declaration name: (type_identifier) @name body: (class_body) @body) @definition
(abstract_class_declaration name: (type_identifier) @name body: (class_body) @body) @definition
(interface_declaration name: (type_identifier) @name body: (interface_body) @body) @definition
(type_alias_declaration name: (type_identifier) @name) @definition
(enum_declaration name: (identifier) @name body: (enum_body) @body) @definition
(method_definition name: (property_identifier) @name body: (statement_block) @body) @definition
(lexical_declaration
  (variable_declarator name: (identifier) @name value: (arrow_function body: (_) @body))) @definition
(program (lexical_declaration (variable_declarator name: (identifier) @name)) @definition)

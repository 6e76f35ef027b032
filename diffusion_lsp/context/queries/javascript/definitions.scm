(function_declaration name: (identifier) @name body: (statement_block) @body) @definition
(generator_function_declaration name: (identifier) @name body: (statement_block) @body) @definition
(class_declaration name: (identifier) @name body: (class_body) @body) @definition
(method_definition name: (property_identifier) @name body: (statement_block) @body) @definition
(lexical_declaration
  (variable_declarator name: (identifier) @name value: (arrow_function body: (_) @body))) @definition
(lexical_declaration
  (variable_declarator name: (identifier) @name value: (function_expression body: (_) @body))) @definition
(program (lexical_declaration (variable_declarator name: (identifier) @name)) @definition)

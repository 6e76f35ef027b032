(class_declaration name: (identifier) @name body: (class_body) @body) @definition
(interface_declaration name: (identifier) @name body: (interface_body) @body) @definition
(enum_declaration name: (identifier) @name body: (enum_body) @body) @definition
(record_declaration name: (identifier) @name body: (class_body) @body) @definition
(method_declaration name: (identifier) @name body: (block) @body) @definition
(method_declaration name: (identifier) @name !body) @definition
(constructor_declaration name: (identifier) @name body: (constructor_body) @body) @definition
(field_declaration declarator: (variable_declarator name: (identifier) @name)) @definition

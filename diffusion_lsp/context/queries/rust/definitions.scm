(function_item name: (identifier) @name body: (block) @body) @definition
(function_signature_item name: (identifier) @name) @definition
(struct_item name: (type_identifier) @name) @definition
(enum_item name: (type_identifier) @name) @definition
(union_item name: (type_identifier) @name) @definition
(trait_item name: (type_identifier) @name body: (declaration_list) @body) @definition
(type_item name: (type_identifier) @name) @definition
(const_item name: (identifier) @name) @definition
(static_item name: (identifier) @name) @definition
(macro_definition name: (identifier) @name) @definition

(block) @body
(class_body) @body
(interface_body) @body
(constructor_body) @body
(enum_body) @body

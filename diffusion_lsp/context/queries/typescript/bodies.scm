(statement_block) @body
(class_body) @body
(interface_body) @body
(enum_body) @body
(switch_body) @body

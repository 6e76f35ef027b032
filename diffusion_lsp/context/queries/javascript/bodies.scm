(statement_block) @body
(class_body) @body
(switch_body) @body

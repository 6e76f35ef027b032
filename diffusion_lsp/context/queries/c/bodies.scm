(compound_statement) @body
(field_declaration_list) @body

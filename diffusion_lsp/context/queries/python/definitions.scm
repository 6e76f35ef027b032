; Definitions offered as cross-file context: @definition spans the whole definition, @name is what
; it is looked up by, @body (optional) is where the signature ends.
(function_definition name: (identifier) @name body: (block) @body) @definition
(class_definition name: (identifier) @name body: (block) @body) @definition
(module (expression_statement (assignment left: (identifier) @name)) @definition)

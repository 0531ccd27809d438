package serve

import (
	"encoding/json"
	"net/http"
)

// apiError is an error as OpenAI's API (and vLLM since 0.10.1) sends it:
// {"error": {"message", "type", "param", "code"}}, code being the HTTP
// status.
type apiError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

type errorBody struct {
	Error apiError `json:"error"`
}

// errorTypes are vLLM's error type names by status.
var errorTypes = map[int]string{
	http.StatusBadRequest:            "BadRequestError",
	http.StatusNotFound:              "NotFoundError",
	http.StatusMethodNotAllowed:      "MethodNotAllowedError",
	http.StatusRequestEntityTooLarge: "RequestEntityTooLargeError",
	http.StatusTooManyRequests:       "RateLimitError",
	http.StatusInternalServerError:   "InternalServerError",
	http.StatusServiceUnavailable:    "ServiceUnavailableError",
}

func newAPIError(status int, param, msg string) *apiError {
	e := &apiError{Message: msg, Type: errorTypes[status], Code: status}
	if e.Type == "" {
		e.Type = http.StatusText(status)
	}
	if param != "" {
		e.Param = &param
	}
	return e
}

func (e *apiError) Error() string { return e.Message }

// writeError sends e with its status.
func writeError(w http.ResponseWriter, e *apiError) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Code)
	_ = json.NewEncoder(w).Encode(errorBody{Error: *e})
}
